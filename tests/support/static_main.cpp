// The static tests are checked when they compile; this main lets CTest count them.
int main() { return 0; }
