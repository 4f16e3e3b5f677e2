#include <cstdio>
int main() { std::puts("hopattn CLI (placeholder)"); return 0; }
