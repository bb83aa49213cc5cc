# tests for issue 4 (generation): filled in as the parts land
