"""Exporting notes to other formats."""
