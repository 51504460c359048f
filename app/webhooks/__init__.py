"""The webhooks: completion and signal deliveries (``views``), their bodies (``body``,
``signal_body``), their idempotency (``deliveries``) and what they read (``queries``)."""
