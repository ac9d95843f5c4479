"""Background work beside the requests: how a loop stops (`background.loops`) and the
sweeper's retention and removals under a lease (`background.sweeper`)."""
