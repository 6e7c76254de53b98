# demo (written below)
