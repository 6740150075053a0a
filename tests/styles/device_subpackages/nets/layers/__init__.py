"""Building layers: normalisation, attention, feed-forward."""
