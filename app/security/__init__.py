"""Who may do what, and the studio's hardening: signing in and roles (``auth``), users
(``users``) and the people page (``people_views``), CSRF tokens (``csrf``), security headers,
rate limits and request bounds (``hardening``)."""
