"""Where models come from: the packaged catalog (:mod:`.catalog`), a model setting resolved to a
checked local file or folder (:mod:`.source`, :mod:`.checks`) and ``voiceagent models pull``
(:mod:`.pull`, the only code that downloads a model).  Which models a profile names is
configuration (:mod:`voiceagent.config.profiles`); choosing a profile by measuring it
(:mod:`voiceagent.backends.auto_profile`) loads engines, so it lives with them."""
