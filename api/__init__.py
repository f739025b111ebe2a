"""What people touch: the ``pykraft`` command line and (planned) the REST admin API."""
