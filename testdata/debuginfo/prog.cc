// prog.cc is the C++ fixture of internal/debuginfo: namespaced methods,
// an overload and a template, so that tests can select functions by their
// demangled names.
#include <cstdio>
#include <string>

namespace srv {

struct Request {
	int id;
	const char *path;
};

class Server {
public:
	explicit Server(int port) : port_(port) {}
	__attribute__((noinline)) int handle(Request *req);
	__attribute__((noinline)) int handle(int id);

private:
	int port_;
	int handled_ = 0;
};

int Server::handle(Request *req)
{
	handled_++;
	std::printf("%d %s %d\n", req->id, req->path, port_);
	return req->id + port_;
}

int Server::handle(int id)
{
	handled_++;
	return id * 2;
}

template <typename T> __attribute__((noinline)) T twice(T v)
{
	return v + v;
}

} // namespace srv

int main(int argc, char **argv)
{
	srv::Server s(8080 + argc);
	srv::Request r{argc, argc > 1 ? argv[1] : "/"};
	int n = s.handle(&r) + s.handle(argc);
	std::printf("%d %ld %d\n", n, srv::twice<long>(argc), srv::twice<int>(argc));
	return 0;
}
