module example.com/debuginfo/goprog

go 1.26
