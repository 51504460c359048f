"""The JSON API: its endpoints (``views``), its read model (``queries``), its schemas
(``schemas``) and the OpenAPI document made from them (``openapi``); ``favicon_views`` serves
the icon the API's pages (and every page) fall back on."""
