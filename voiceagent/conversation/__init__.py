"""One conversation's state above the stages: its history as the model sees it and as the listener
heard it (:mod:`.history`), the prompt fitted to the model's window (:mod:`.prompt_fit`), the turn
controller that owns the replies (:mod:`.replies`) and one reply's record (:mod:`.reply`)."""
