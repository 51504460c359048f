"""The webhooks: completion and signal deliveries (``views``), their bodies (``body``,
``signal_body``) and their idempotency (``deliveries``)."""
