"""Model providers and the protocol they implement (see `models.base`)."""

from .anthropic import AnthropicModel
from .base import (
    Message,
    Model,
    ModelDelta,
    ModelRequest,
    ModelResponse,
    StreamingModel,
    ToolCall,
    ToolDefinition,
    block_model_requests,
    ensure_requests_allowed,
    stream_response,
)
from .local import LocalModel
from .openai import OpenAIModel

__all__ = [
    "AnthropicModel",
    "LocalModel",
    "Message",
    "Model",
    "ModelDelta",
    "ModelRequest",
    "ModelResponse",
    "OpenAIModel",
    "ToolCall",
    "StreamingModel",
    "ToolDefinition",
    "block_model_requests",
    "ensure_requests_allowed",
    "stream_response",
]
