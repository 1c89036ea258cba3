"""The report model and the rules over it: each finding has a stable id, a severity and a fix."""
