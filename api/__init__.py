"""What people touch: the ``pykraft`` command line and the REST admin API (``api.rest``)."""
