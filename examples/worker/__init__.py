"""The example worker: three text tasks, a supervisor with two children, results, drain."""
