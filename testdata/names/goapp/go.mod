module goapp

go 1.26.0
