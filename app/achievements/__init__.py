"""The achievements area: the list of checksums granted per key, searched and forgotten
(``views``), and its read model (``queries``)."""
