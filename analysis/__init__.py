"""Figures (PNG + PDF) and tables (Markdown + LaTeX) rebuilt from ``results/`` alone.

    python -m analysis all              # everything whose inputs exist
    python -m analysis fig5 table2      # selected targets

Colours per strategy are fixed in :mod:`analysis.style` and shared by every figure.
"""
