"""The captured step: which earlier call produced each tensor a call reads, and its original."""
