"""Local data share: DS instructions over each workgroup's LDS block."""
