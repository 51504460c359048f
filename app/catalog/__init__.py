"""The catalog: every registered definition drawn as a diagram, with its options and a form
to start an action (``views``), read from the registry by ``definitions``."""
