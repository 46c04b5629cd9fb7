"""Model providers and the protocol they implement (see `models.base`)."""

from planexec.models.anthropic import AnthropicModel
from planexec.models.base import (
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
from planexec.models.local import LocalModel
from planexec.models.openai import OpenAIModel

__all__ = [
    "AnthropicModel",
    "LocalModel",
    "Message",
    "Model",
    "ModelDelta",
    "ModelRequest",
    "ModelResponse",
    "OpenAIModel",
    "StreamingModel",
    "ToolCall",
    "ToolDefinition",
    "block_model_requests",
    "ensure_requests_allowed",
    "stream_response",
]
