"""Model providers and the protocol they implement (see `models.base`)."""

from .base import (
    Message,
    Model,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolDefinition,
    block_model_requests,
    ensure_requests_allowed,
)
from .local import LocalModel
from .openai import OpenAIModel

__all__ = [
    "LocalModel",
    "Message",
    "Model",
    "ModelRequest",
    "ModelResponse",
    "OpenAIModel",
    "ToolCall",
    "ToolDefinition",
    "block_model_requests",
    "ensure_requests_allowed",
]
