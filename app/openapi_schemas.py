"""The schemas of the studio's OpenAPI document (``app/openapi.py``), and the small
builders both use."""

from __future__ import annotations

from typing import Any

from engine import status


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(schema_type: str, **more: Any) -> dict[str, Any]:
    return {"type": [schema_type, "null"], **more}


def json_content(schema: dict[str, Any], example: Any = None) -> dict[str, Any]:
    media: dict[str, Any] = {"schema": schema}
    if example is not None:
        media["example"] = example
    return {"application/json": media}


def error_response(description: str) -> dict[str, Any]:
    return {"description": description, "content": json_content(ref("Error"))}


TIME = nullable("string", format="date-time", description="UTC")
#: An action's summary fields: in the list (ActionSummary) and in each node of a tree.
SUMMARY: dict[str, Any] = {
    "id": {"type": "integer"},
    "name": {"type": "string"},
    "actor_type": {"type": "string"},
    "actor_id": {"type": "string"},
    "status": ref("ActionStatus"),
    "outbound": {"type": "boolean"},
    "started_at": TIME,
    "completed_at": TIME,
}

SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error", "message"],
        "properties": {
            "error": {"type": "string", "description": "A code, e.g. bad_signature, not_found"},
            "message": {"type": "string", "description": "What is wrong, in words"},
            "parameter": {"type": "string", "description": "The query parameter at fault (400)"},
            "fields": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "description": "Each field at fault, with what is wrong with it (422)",
            },
        },
    },
    "ActionStatus": {"type": "string", "enum": list(status.ACTION_STATUSES)},
    "ActionSummary": {
        "type": "object",
        "required": ["id", "name", "actor_type", "actor_id", "status", "outbound"],
        "properties": {
            **SUMMARY,
        },
    },
    "ErrorSummary": {
        "type": ["object", "null"],
        "properties": {
            "class": {"type": "string"},
            "message": {"type": "string"},
            "traceback": {"type": "string", "description": "Only on GET /api/actions/{action_id}"},
        },
    },
    "Action": {
        "allOf": [
            ref("ActionSummary"),
            {
                "type": "object",
                "properties": {
                    "arguments": {"type": "array", "description": "The arguments, as stored (JSON)"},
                    "root": {"type": "boolean", "description": "Invoked without a parent step"},
                    "tree_id": {"type": "integer", "description": "The root of the tree it belongs to"},
                    "concurrency_key": {"type": "string", "description": "Its lane"},
                    "checksum_key": {"type": "string"},
                    "checksum": nullable("string"),
                    "current_step_index": {"type": "integer"},
                    "timeout_seconds": nullable("number", description="Seconds, with their fraction"),
                    "deadline_at": TIME,
                    "superseded_by_id": nullable("integer"),
                    "result": nullable("object", description="The payload it was completed with"),
                    "error": ref("ErrorSummary"),
                    "created_at": TIME,
                    "updated_at": TIME,
                    "links": {
                        "type": "object",
                        "properties": {"self": {"type": "string"}, "tree": {"type": "string"}},
                    },
                },
            },
        ]
    },
    "Step": {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "index": {"type": "integer", "description": "Which step of the definition"},
            "status": {"type": "string", "enum": list(status.STEP_STATUSES)},
            "attempt": {"type": "integer"},
            "retry_at": TIME,
            "pending_actions_count": {"type": "integer"},
            "unsuccessful_actions_count": {"type": "integer"},
            "started_at": TIME,
            "performed_at": TIME,
            "completed_at": TIME,
            "children": {
                "type": "array",
                "items": {"type": "integer"},
                "description": "Ids of the actions the step waited on",
            },
        },
    },
    "AttemptError": {
        "type": "object",
        "properties": {
            "event": {
                "type": "string",
                "description": "attempt_failed, step_errored, step_failed, callback_failed or completed",
            },
            "at": TIME,
            "step_id": nullable("integer"),
            "attempt": nullable("integer"),
            "next_attempt_at": nullable("string"),
            "error_class": {"type": "string"},
            "error_message": {"type": "string"},
            "traceback": nullable("string"),
        },
    },
    "ActionDetail": {
        "allOf": [
            ref("Action"),
            {
                "type": "object",
                "required": ["steps", "parents", "errors"],
                "properties": {
                    "steps": {"type": "array", "items": ref("Step")},
                    "parents": {
                        "type": "array",
                        "description": "The steps that waited on it (several when reuse attached it)",
                        "items": {
                            "type": "object",
                            "properties": {
                                "action_id": {"type": "integer"},
                                "step_id": {"type": "integer"},
                                "step_index": {"type": "integer"},
                            },
                        },
                    },
                    "errors": {
                        "type": "array",
                        "description": "Every error in its history, oldest first",
                        "items": ref("AttemptError"),
                    },
                },
            },
        ]
    },
    "TreeNode": {
        "type": "object",
        "description": (
            "An action with its steps and their children. An action reached twice is shown in full "
            'once, then as {"id", "name", "status", "repeated": true}; one cut off (too many nodes, '
            'too deep) as {"id", "truncated": true}.'
        ),
        "required": ["id"],
        "properties": {
            **SUMMARY,
            "error": ref("ErrorSummary"),
            "repeated": {"type": "boolean"},
            "truncated": {"type": "boolean"},
            "steps": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "integer"},
                        "index": {"type": "integer"},
                        "status": {"type": "string"},
                        "children": {"type": "array", "items": ref("TreeNode")},
                    },
                },
            },
        },
    },
    "Tree": {
        "type": "object",
        "required": ["tree", "nodes", "truncated"],
        "properties": {
            "tree": ref("TreeNode"),
            "nodes": {"type": "integer", "description": "Actions loaded"},
            "truncated": {"type": "boolean"},
        },
    },
    "ActionPage": {
        "type": "object",
        "required": ["actions", "limit", "next"],
        "properties": {
            "actions": {"type": "array", "items": ref("Action")},
            "limit": {"type": "integer"},
            "next": nullable("string", description="The next page's URL; null on the last page"),
        },
    },
    "Lane": {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "concurrency_key": {"type": "string"},
            "created_at": TIME,
            "current": {
                "oneOf": [
                    {
                        "allOf": [
                            ref("ActionSummary"),
                            {"type": "object", "properties": {"deadline_at": TIME}},
                        ]
                    },
                    {"type": "null"},
                ]
            },
            "waiting_for_completion": {
                "type": "boolean",
                "description": "Its current action is outbound: the lane moves when it is completed",
            },
            "queued": {"type": "integer", "description": "Pending actions behind the current one"},
            "links": {
                "type": "object",
                "properties": {"current": {"type": "string"}, "actions": {"type": "string"}},
            },
        },
    },
    "LanePage": {
        "type": "object",
        "required": ["lanes", "limit", "next"],
        "properties": {
            "lanes": {"type": "array", "items": ref("Lane")},
            "limit": {"type": "integer"},
            "next": nullable("string"),
        },
    },
    "CompletionRequest": {
        "type": "object",
        "description": (
            "Give action_id, or actor_type + actor_id + name (the lane's current outbound action)."
        ),
        "required": ["id", "status"],
        "additionalProperties": False,
        "properties": {
            "id": {
                "type": "string",
                "minLength": 1,
                "maxLength": 255,
                "description": "This completion's id: the same in every retry, a new one per completion",
            },
            "action_id": {"type": "integer", "minimum": 1},
            "actor_type": {"type": "string", "maxLength": 255},
            "actor_id": {"type": ["string", "integer"]},
            "name": {"type": "string", "maxLength": 255},
            "status": {"type": "string", "enum": sorted(status.COMPLETIONS)},
            "note": nullable("string", maxLength=10_000, description="Why: kept in the history and audit"),
            "payload": nullable("object", description="Kept as the action's result"),
        },
        "oneOf": [
            {"required": ["action_id"]},
            {"required": ["actor_type", "actor_id", "name"]},
        ],
    },
    "CompletionResult": {
        "type": "object",
        "required": ["id", "completed", "reason", "action_id"],
        "properties": {
            "id": {"type": "string"},
            "completed": {"type": "boolean", "description": "false: it was completed before"},
            "reason": {"type": "string", "enum": ["completed", "already_completed"]},
            "action_id": {"type": "integer"},
            "requested_status": {"type": "string"},
            "action_status": ref("ActionStatus"),
        },
    },
}
