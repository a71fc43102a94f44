"""Tool calling in one place: the tool spec the engines are given, a call's arguments parsed
leniently and checked against the tool's schema (:mod:`.args`), the engines' tool formats
(:mod:`.format`: how tools are written into a prompt and calls read back out of a reply), and the
tools the server runs itself (:mod:`.builtin`).

A low layer: it depends on nothing above ``voiceagent.errors``, so backends, stages and the
session may all import it.
"""
