"""Model providers, the protocol they implement (see `models.base`) and what each model can do (`models.profile`)."""

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
from planexec.models.pricing import PriceTable
from planexec.models.profile import CAPABLE, EMBEDDED, ModelProfile, profile_of
from planexec.models.providers import parse_model_name
from planexec.models.settings import ModelSettings

__all__ = [
    "CAPABLE",
    "EMBEDDED",
    "AnthropicModel",
    "LocalModel",
    "Message",
    "Model",
    "ModelDelta",
    "ModelProfile",
    "ModelRequest",
    "ModelResponse",
    "ModelSettings",
    "OpenAIModel",
    "PriceTable",
    "StreamingModel",
    "ToolCall",
    "ToolDefinition",
    "block_model_requests",
    "ensure_requests_allowed",
    "parse_model_name",
    "profile_of",
    "stream_response",
]
