"""The lanes (the engine's performances): their pages (``views``), their read model
(``queries``, ``queries_deadlocks``) and why a lane is not moving, in words (``reasons``)."""
