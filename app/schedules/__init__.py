"""The schedules: their page and commands (``views``) and their read model (``queries``)."""
