"""Figures and tables for reports/."""
