"""The action page: one action's tree, graph, timeline, signals and commands (``views``,
``signal_views`` for sending signals), its read models (``queries_tree``, ``queries_timeline``,
``queries_signals``, ``queries_attempts``) and its helpers (``tree_model``, ``tree_graph``,
``step_source``, ``command_refusals``)."""
