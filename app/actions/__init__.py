"""The actions list: its pages and bulk commands (``views``), its filter (``filters``) and its
read model (``queries``, which the overview reads too)."""
