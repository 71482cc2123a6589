"""`pacs status`: where every job of an experiment stands, from its files alone (pacs.status.experiment), and how a
terminal shows it (pacs.status.terminal)."""
