"""The audit: every operator command and webhook completion, newest first (``views``), and
its read model (``queries``)."""
