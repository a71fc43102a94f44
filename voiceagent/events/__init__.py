"""The typed events of a session, by direction.

* :mod:`voiceagent.events.frames`: pipeline frames, between stages and from stages to the
  conversation core;
* :mod:`voiceagent.events.session`: what the session tells its transport (and so its client);
* :mod:`voiceagent.events.base`: the header all of them carry.

Every name is also importable from here.
"""

from __future__ import annotations

from voiceagent.events.base import *  # noqa: F403
from voiceagent.events.base import __all__ as _base
from voiceagent.events.frames import *  # noqa: F403
from voiceagent.events.frames import __all__ as _frames
from voiceagent.events.session import *  # noqa: F403
from voiceagent.events.session import __all__ as _session

__all__ = [*_base, *_frames, *_session]
