module httpserver

go 1.26
