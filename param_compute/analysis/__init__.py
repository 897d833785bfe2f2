"""Offline tools over results files: compare, merge, rounds, totals, the ledger, reports."""
