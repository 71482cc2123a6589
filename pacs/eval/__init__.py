"""Evaluation: sampling N answers per problem, scoring them, and pass@k."""
