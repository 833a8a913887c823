"""Evidence: the runs directory (FORMAT.md §1): the store and its chain writer, the
group commit that makes writes durable, the store check and recovery, merges, and the
read views over runs. Import the modules themselves; this file re-exports nothing.
"""
