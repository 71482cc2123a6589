"""`pacs bench`: speed measurements, written under results/bench/."""
