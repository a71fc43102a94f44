"""Pure text helpers, free of I/O and models: a streamed reply split into speakable clauses
(:mod:`.clauses`), the transcription loop guard (:mod:`.stt_guard`), the transcription prompt
(:mod:`.stt_prompt`) and whether a transcript stops where a sentence cannot end
(:mod:`.turn_words`)."""
