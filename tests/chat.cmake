# tests for issue 4 (chat): filled in as the parts land
