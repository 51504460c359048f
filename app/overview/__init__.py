"""The overview: what needs attention, throughput and failures (``views``), its read models
(``queries``, ``queries_waiting``, ``queries_compensations``) and its chart (``chart``)."""
