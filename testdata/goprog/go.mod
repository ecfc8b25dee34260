module goprog

go 1.26.0
