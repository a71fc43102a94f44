"""Stage base, bounded channels, generation scope and off-loop helpers."""

from voiceagent.pipeline.channel import Channel
from voiceagent.pipeline.generation import Generations, GenerationScope
from voiceagent.pipeline.offload import iterate_in, run_in
from voiceagent.pipeline.stage import Stage, StageContext

__all__ = ["Channel", "GenerationScope", "Generations", "Stage", "StageContext", "iterate_in", "run_in"]
