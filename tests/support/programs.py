"""One program per runtime and behaviour, for the one-shot engine's tests
(Piston's /api/v2, /v1/execute's `language`) and its benchmark.

Each runtime (by Piston's language name, and the toolchain where a language
has several) has:

    hello      reads a line of stdin and its args; prints "hello <line>",
               then "arg <a>" for each argument
    fail       writes "boom" to stderr and exits with status 3
    broken     does not compile (compiled runtimes only)
    loop       never ends (burns CPU)
    flood      writes to stdout without end
    hog        allocates and touches memory without end
    forkbomb   makes processes without end, in the language's own way
    connect    connects to 127.0.0.1:{port} (over TCP) and prints
               "connected", or "refused: <why>"

`{port}` in a program is the caller's to fill in.
"""

C_HELLO = r'''#include <stdio.h>
int main(int argc, char **argv) {
  char line[256] = "";
  if (fgets(line, sizeof line, stdin) == NULL) return 9;
  printf("hello %s", line);
  for (int i = 1; i < argc; i++) printf("arg %s\n", argv[i]);
  return 0;
}
'''
C_NET = r'''#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
int main(void) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_port = htons({port});
  a.sin_addr.s_addr = htonl(0x7f000001);
  if (connect(s, (struct sockaddr *)&a, sizeof a) == 0) puts("connected");
  else printf("refused: %s\n", strerror(errno));
  return 0;
}
'''

PROGRAMS = {
    "c": {
        "hello": C_HELLO,
        "fail": '#include <stdio.h>\nint main(void) { fputs("boom\\n", stderr); return 3; }\n',
        "broken": "int main(void) { return missing_name; }\n",
        "loop": "int main(void) { volatile unsigned long n = 0; for (;;) n++; }\n",
        "flood": '#include <stdio.h>\nint main(void) { for (;;) puts("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"); }\n',
        "hog": "#include <stdlib.h>\n#include <string.h>\nint main(void) { for (;;) { char *p = malloc(1 << 24); if (!p) return 1; memset(p, 1, 1 << 24); } }\n",
        "forkbomb": "#include <unistd.h>\nint main(void) { for (;;) fork(); }\n",
        "connect": C_NET,
    },
    "c++": {
        "hello": '#include <iostream>\n#include <string>\nint main(int argc, char **argv) {\n  std::string line;\n  std::getline(std::cin, line);\n  std::cout << "hello " << line << "\\n";\n  for (int i = 1; i < argc; i++) std::cout << "arg " << argv[i] << "\\n";\n}\n',
        "fail": '#include <iostream>\nint main() { std::cerr << "boom\\n"; return 3; }\n',
        "broken": "int main() { std::vector<int> v; }\n",
        "loop": "int main() { volatile unsigned long n = 0; for (;;) n = n + 1; }\n",
        "flood": '#include <cstdio>\nint main() { for (;;) std::puts("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"); }\n',
        "hog": "#include <vector>\n#include <cstring>\nint main() { std::vector<char*> v; for (;;) { char *p = new char[1 << 24]; std::memset(p, 1, 1 << 24); v.push_back(p); } }\n",
        "forkbomb": "#include <unistd.h>\nint main() { for (;;) fork(); }\n",
        "connect": C_NET,
    },
    "rust": {
        "hello": 'use std::io::BufRead;\nfn main() {\n    let mut line = String::new();\n    std::io::stdin().lock().read_line(&mut line).unwrap();\n    print!("hello {}", line);\n    for a in std::env::args().skip(1) { println!("arg {}", a); }\n}\n',
        "fail": 'fn main() { eprintln!("boom"); std::process::exit(3); }\n',
        "broken": "fn main() { let x: u32 = \"text\"; }\n",
        "loop": "fn main() { let mut n: u64 = 0; loop { n = n.wrapping_add(1); if n == u64::MAX { print!(\"\"); } } }\n",
        "flood": 'fn main() { loop { println!("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"); } }\n',
        "hog": "fn main() { let mut v: Vec<Vec<u8>> = Vec::new(); loop { v.push(vec![1u8; 1 << 24]); } }\n",
        "forkbomb": 'fn main() { loop { let _ = std::process::Command::new(std::env::current_exe().unwrap()).spawn(); } }\n',
        "connect": 'fn main() {\n    match std::net::TcpStream::connect("127.0.0.1:{port}") {\n        Ok(_) => println!("connected"),\n        Err(e) => println!("refused: {}", e),\n    }\n}\n',
    },
    "go": {
        "hello": 'package main\n\nimport (\n\t"bufio"\n\t"fmt"\n\t"os"\n)\n\nfunc main() {\n\tline, _ := bufio.NewReader(os.Stdin).ReadString(\'\\n\')\n\tfmt.Print("hello " + line)\n\tfor _, a := range os.Args[1:] {\n\t\tfmt.Println("arg " + a)\n\t}\n}\n',
        "fail": 'package main\n\nimport (\n\t"fmt"\n\t"os"\n)\n\nfunc main() {\n\tfmt.Fprintln(os.Stderr, "boom")\n\tos.Exit(3)\n}\n',
        "broken": "package main\n\nfunc main() {\n\tvar x int = \"text\"\n}\n",
        "loop": "package main\n\nfunc main() {\n\tn := 0\n\tfor {\n\t\tn++\n\t}\n}\n",
        "flood": 'package main\n\nimport "fmt"\n\nfunc main() {\n\tfor {\n\t\tfmt.Println("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx")\n\t}\n}\n',
        "hog": "package main\n\nfunc main() {\n\tvar keep [][]byte\n\tfor {\n\t\tb := make([]byte, 1<<24)\n\t\tfor i := range b {\n\t\t\tb[i] = 1\n\t\t}\n\t\tkeep = append(keep, b)\n\t}\n}\n",
        "forkbomb": 'package main\n\nimport (\n\t"os"\n\t"os/exec"\n)\n\nfunc main() {\n\tfor {\n\t\t_ = exec.Command(os.Args[0]).Start()\n\t}\n}\n',
        "connect": 'package main\n\nimport (\n\t"fmt"\n\t"net"\n)\n\nfunc main() {\n\tif _, err := net.Dial("tcp", "127.0.0.1:{port}"); err != nil {\n\t\tfmt.Println("refused: " + err.Error())\n\t} else {\n\t\tfmt.Println("connected")\n\t}\n}\n',
    },
    "java": {
        "hello": 'import java.util.Scanner;\n\npublic class Main {\n    public static void main(String[] args) {\n        System.out.println("hello " + new Scanner(System.in).nextLine());\n        for (String a : args) System.out.println("arg " + a);\n    }\n}\n',
        "fail": 'public class Main {\n    public static void main(String[] args) {\n        System.err.println("boom");\n        System.exit(3);\n    }\n}\n',
        "broken": "public class Main {\n    public static void main(String[] args) {\n        int x = \"text\";\n    }\n}\n",
        "loop": "public class Main {\n    public static void main(String[] args) {\n        long n = 0;\n        while (true) n++;\n    }\n}\n",
        "flood": 'public class Main {\n    public static void main(String[] args) {\n        while (true) System.out.println("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");\n    }\n}\n',
        "hog": "import java.util.ArrayList;\n\npublic class Main {\n    public static void main(String[] args) {\n        ArrayList<long[]> keep = new ArrayList<>();\n        while (true) keep.add(new long[1 << 21]);\n    }\n}\n",
        "forkbomb": 'public class Main {\n    public static void main(String[] args) throws Exception {\n        while (true) new ProcessBuilder("sleep", "60").start();\n    }\n}\n',
        "connect": 'public class Main {\n    public static void main(String[] args) {\n        try (java.net.Socket s = new java.net.Socket("127.0.0.1", {port})) {\n            System.out.println("connected");\n        } catch (Exception e) {\n            System.out.println("refused: " + e.getMessage());\n        }\n    }\n}\n',
    },
    "kotlin": {
        "hello": 'fun main(args: Array<String>) {\n    println("hello " + readLine())\n    for (a in args) println("arg " + a)\n}\n',
        "fail": 'fun main() {\n    System.err.println("boom")\n    kotlin.system.exitProcess(3)\n}\n',
        "broken": 'fun main() {\n    val x: Int = "text"\n}\n',
        "loop": "fun main() {\n    var n = 0L\n    while (true) n++\n}\n",
        "flood": 'fun main() {\n    while (true) println("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx")\n}\n',
        "hog": "fun main() {\n    val keep = ArrayList<LongArray>()\n    while (true) keep.add(LongArray(1 shl 21))\n}\n",
        "forkbomb": 'fun main() {\n    while (true) ProcessBuilder("sleep", "60").start()\n}\n',
        "connect": 'fun main() {\n    try {\n        java.net.Socket("127.0.0.1", {port}).close()\n        println("connected")\n    } catch (e: Exception) {\n        println("refused: " + e.message)\n    }\n}\n',
    },
    "python": {
        "hello": 'import sys\nprint("hello " + input())\nfor a in sys.argv[1:]:\n    print("arg " + a)\n',
        "fail": 'import sys\nprint("boom", file=sys.stderr)\nsys.exit(3)\n',
        "loop": "while True:\n    pass\n",
        "flood": 'while True:\n    print("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx")\n',
        "hog": "keep = []\nwhile True:\n    keep.append(bytearray(1 << 24))\n",
        "forkbomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
        "connect": 'import socket\ntry:\n    socket.create_connection(("127.0.0.1", {port}), timeout=2)\n    print("connected")\nexcept OSError as e:\n    print("refused:", e)\n',
    },
    "javascript/node": {
        "hello": 'const line = require("fs").readFileSync(0, "utf8").split("\\n")[0];\nconsole.log("hello " + line);\nfor (const a of process.argv.slice(2)) console.log("arg " + a);\n',
        "fail": 'console.error("boom");\nprocess.exit(3);\n',
        "loop": "let n = 0;\nfor (;;) n++;\n",
        "flood": 'for (;;) process.stdout.write("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\\n");\n',
        "hog": "const keep = [];\nfor (;;) keep.push(Buffer.alloc(1 << 24, 1));\n",
        "forkbomb": 'const { spawn } = require("child_process");\nfor (;;) { try { spawn(process.execPath, [__filename]); } catch (e) {} }\n',
        "connect": 'const s = require("net").connect({port}, "127.0.0.1");\ns.on("connect", () => { console.log("connected"); s.destroy(); });\ns.on("error", (e) => console.log("refused: " + e.message));\n',
    },
    "javascript/deno": {
        "hello": 'const text = await new Response(Deno.stdin.readable).text();\nconsole.log("hello " + text.split("\\n")[0]);\nfor (const a of Deno.args) console.log("arg " + a);\n',
        "fail": 'console.error("boom");\nDeno.exit(3);\n',
        "loop": "let n = 0;\nfor (;;) n++;\n",
        "flood": 'for (;;) console.log("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");\n',
        "hog": "const keep = [];\nfor (;;) keep.push(new Uint8Array(1 << 24).fill(1));\n",
        "forkbomb": 'for (;;) { try { new Deno.Command("sleep", { args: ["60"] }).spawn(); } catch (_) {} }\n',
        "connect": 'try {\n  (await Deno.connect({ hostname: "127.0.0.1", port: {port} })).close();\n  console.log("connected");\n} catch (e) {\n  console.log("refused: " + e.message);\n}\n',
    },
    "typescript": {
        "hello": 'const text: string = await new Response(Deno.stdin.readable).text();\nconsole.log("hello " + text.split("\\n")[0]);\nfor (const a of Deno.args) console.log("arg " + a);\n',
        "fail": 'console.error("boom");\nDeno.exit(3);\n',
        "broken": 'const x: number = "text";\nconsole.log(x);\n',
        "loop": "let n: number = 0;\nfor (;;) n++;\n",
        "flood": 'for (;;) console.log("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");\n',
        "hog": "const keep: Uint8Array[] = [];\nfor (;;) keep.push(new Uint8Array(1 << 24).fill(1));\n",
        "forkbomb": 'for (;;) { try { new Deno.Command("sleep", { args: ["60"] }).spawn(); } catch (_) { /* at the cap */ } }\n',
        "connect": 'try {\n  (await Deno.connect({ hostname: "127.0.0.1", port: {port} })).close();\n  console.log("connected");\n} catch (e) {\n  console.log("refused: " + (e as Error).message);\n}\n',
    },
    "ruby": {
        "hello": 'puts "hello " + $stdin.gets.chomp\nARGV.each { |a| puts "arg " + a }\n',
        "fail": '$stderr.puts "boom"\nexit 3\n',
        "loop": "n = 0\nloop { n += 1 }\n",
        "flood": 'loop { puts "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" }\n',
        "hog": "keep = []\nloop { keep << ('x' * (1 << 24)) }\n",
        "forkbomb": "loop { begin; fork; rescue; end }\n",
        "connect": 'require "socket"\nbegin\n  TCPSocket.new("127.0.0.1", {port}).close\n  puts "connected"\nrescue => e\n  puts "refused: #{e.message}"\nend\n',
    },
    "php": {
        "hello": '<?php\n$line = trim(fgets(STDIN));\necho "hello $line\\n";\nforeach (array_slice($argv, 1) as $a) echo "arg $a\\n";\n',
        "fail": '<?php\nfwrite(STDERR, "boom\\n");\nexit(3);\n',
        "loop": "<?php\n$n = 0;\nwhile (true) $n++;\n",
        "flood": '<?php\nwhile (true) echo "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\\n";\n',
        "hog": "<?php\nini_set('memory_limit', '-1');\n$keep = [];\nwhile (true) $keep[] = str_repeat('x', 1 << 24);\n",
        "forkbomb": "<?php\nwhile (true) { $p[] = @proc_open(['sleep', '60'], [], $pipes); }\n",
        "connect": '<?php\n$s = @fsockopen("127.0.0.1", {port}, $errno, $errstr, 2);\necho $s ? "connected\\n" : "refused: $errstr\\n";\n',
    },
    "perl": {
        "hello": 'my $line = <STDIN>;\nchomp $line;\nprint "hello $line\\n";\nprint "arg $_\\n" for @ARGV;\n',
        "fail": 'print STDERR "boom\\n";\nexit 3;\n',
        "loop": "my $n = 0;\nwhile (1) { $n++ }\n",
        "flood": 'while (1) { print "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\\n" }\n',
        "hog": "my @keep;\nwhile (1) { push @keep, 'x' x (1 << 24) }\n",
        "forkbomb": "while (1) { fork }\n",
        "connect": 'use IO::Socket::INET;\nmy $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:{port}", Timeout => 2);\nprint $s ? "connected\\n" : "refused: $@\\n";\n',
    },
    "lua": {
        "hello": 'local line = io.read("l")\nprint("hello " .. line)\nfor _, a in ipairs(arg) do print("arg " .. a) end\n',
        "fail": 'io.stderr:write("boom\\n")\nos.exit(3)\n',
        "loop": "local n = 0\nwhile true do n = n + 1 end\n",
        "flood": 'while true do print("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx") end\n',
        "hog": "local keep = {}\nwhile true do keep[#keep + 1] = string.rep('x', 1 << 24) .. #keep end\n",
        "forkbomb": 'while true do io.popen("sleep 60 &") end\n',
        "connect": 'local ok = os.execute("exec 3<>/dev/tcp/127.0.0.1/{port}")\nprint(ok and "connected" or "refused: no connection")\n',
    },
    "bash": {
        "hello": 'read -r line\necho "hello $line"\nfor a in "$@"; do echo "arg $a"; done\n',
        "fail": 'echo boom >&2\nexit 3\n',
        "loop": "while :; do :; done\n",
        "flood": "while :; do echo xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; done\n",
        "hog": 'x=$(head -c 4000000000 /dev/zero | tr "\\0" x)\n',
        "forkbomb": "f() { f | f & }; f; sleep 30\n",
        "connect": 'if exec 3<>/dev/tcp/127.0.0.1/{port}; then echo connected; else echo "refused: no connection"; fi\n',
    },
    "rscript": {
        "hello": 'line <- readLines(file("stdin"), n = 1)\ncat("hello ", line, "\\n", sep = "")\nfor (a in commandArgs(trailingOnly = TRUE)) cat("arg ", a, "\\n", sep = "")\n',
        "fail": 'message("boom")\nquit(status = 3)\n',
        "loop": "n <- 0\nrepeat { n <- n + 1 }\n",
        "flood": 'repeat cat("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\\n")\n',
        "hog": "keep <- list()\nrepeat keep[[length(keep) + 1]] <- numeric(2^21) + 1\n",
        "forkbomb": 'repeat system("sleep 60", wait = FALSE)\n',
        "connect": 'r <- tryCatch({ s <- socketConnection("127.0.0.1", {port}, timeout = 2); close(s); "connected" },\n              error = function(e) paste("refused:", conditionMessage(e)),\n              warning = function(w) paste("refused:", conditionMessage(w)))\ncat(r, "\\n", sep = "")\n',
    },
}

COMPILED = {"c", "c++", "rust", "go", "java", "kotlin", "typescript"}


def program(runtime, behaviour, port=0):
    """The source of `behaviour` for `runtime` ("javascript/node" names a
    language's toolchain), with {port} filled in."""
    return PROGRAMS[runtime][behaviour].replace("{port}", str(port))
