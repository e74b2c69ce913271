"""The drivers and the Loop: both drivers step by step, batches, streams, cancellation, retries and
the contract end to end."""
