// app.cc is a C++ program whose functions have mangled symbol names, for
// the receiver's messages about names written demangled.
namespace app {
__attribute__((noinline)) int handle(int x) { return x * 2; }
__attribute__((noinline)) int handle(const char *s) { return s[0]; }
struct Server {
	__attribute__((noinline)) int serve(int n);
};
int Server::serve(int n) { return handle(n) + handle("x"); }
} // namespace app

int main(int argc, char **) {
	app::Server s;
	return s.serve(argc) == 0;
}
