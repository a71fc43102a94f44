"""The semantic reply cache: answers reused across the conversations of one deployment."""
