"""Declaring a machine: the YAML declaration, its checks, the compiled decide table, the halt
policy and lint."""
