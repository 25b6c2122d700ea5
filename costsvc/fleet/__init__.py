"""The fleet's GPUs over a time range: present, held, idle, lost."""
