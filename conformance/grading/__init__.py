"""Grading a class (it imports the checks; the checks never import it): ``runner`` runs each submission isolated and
scores it, ``zygote`` forks those runs, ``judge`` runs the checks that only call a submission in a process where its
code never ran, ``integrity`` guards the process beside the code, and ``reports`` writes every report format."""
