"""A pykraft node process: its configuration, its storage directories, the controller."""
