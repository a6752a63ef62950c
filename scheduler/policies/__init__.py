"""Match policies: the named policies, their scoring, and libstdc++'s sort order for ties."""
