"""Small text helpers for the blog and the catalog."""
