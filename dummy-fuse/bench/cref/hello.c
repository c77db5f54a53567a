// hello.c: the C reference of dummy-fuse for `make bench`. The same read-only filesystem (a 0555 root holding
// dummy-file.txt = "Hello world!\n", 0444) on libfuse3's high-level API and its default multi-threaded loop
// (fuse_main), as a C driver would write it. Options of its own:
//   --direct-io            every read reaches the server (fi->direct_io), like dummy-fuse --direct-io
//   --read-latency-us=N    delay every read by N microseconds, like dummy-fuse --read-latency
// Built by hack/bench.sh: gcc -O2 hello.c $(pkg-config --cflags --libs fuse3)
#define FUSE_USE_VERSION 31

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <fuse.h>

static const char content[] = "Hello world!\n";
static const char name[] = "dummy-file.txt";

static struct options {
	int direct_io;
	unsigned read_latency_us;
} opts;

static const struct fuse_opt option_spec[] = {
	{"--direct-io", offsetof(struct options, direct_io), 1},
	{"--read-latency-us=%u", offsetof(struct options, read_latency_us), 1},
	FUSE_OPT_END,
};

static void *hello_init(struct fuse_conn_info *conn, struct fuse_config *cfg) {
	(void)conn;
	cfg->entry_timeout = 1; // dummy-fuse's defaults
	cfg->attr_timeout = 1;
	cfg->negative_timeout = 0;
	return NULL;
}

static int hello_getattr(const char *path, struct stat *st, struct fuse_file_info *fi) {
	(void)fi;
	memset(st, 0, sizeof(*st));
	if (strcmp(path, "/") == 0) {
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
	} else if (path[0] == '/' && strcmp(path + 1, name) == 0) {
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
		st->st_size = sizeof(content) - 1;
	} else {
		return -ENOENT;
	}
	return 0;
}

static int hello_readdir(const char *path, void *buf, fuse_fill_dir_t filler, off_t off, struct fuse_file_info *fi,
			 enum fuse_readdir_flags flags) {
	(void)off, (void)fi, (void)flags;
	if (strcmp(path, "/") != 0)
		return -ENOENT;
	filler(buf, ".", NULL, 0, 0);
	filler(buf, "..", NULL, 0, 0);
	filler(buf, name, NULL, 0, 0);
	return 0;
}

static int hello_open(const char *path, struct fuse_file_info *fi) {
	if (path[0] != '/' || strcmp(path + 1, name) != 0)
		return -ENOENT;
	if ((fi->flags & O_ACCMODE) != O_RDONLY)
		return -EACCES;
	if (opts.direct_io)
		fi->direct_io = 1; // FOPEN_DIRECT_IO
	else
		fi->keep_cache = 1; // FOPEN_KEEP_CACHE
	return 0;
}

static int hello_read(const char *path, char *buf, size_t size, off_t off, struct fuse_file_info *fi) {
	(void)fi;
	if (path[0] != '/' || strcmp(path + 1, name) != 0)
		return -ENOENT;
	if (opts.read_latency_us) {
		struct timespec d = {opts.read_latency_us / 1000000, (opts.read_latency_us % 1000000) * 1000L};
		while (nanosleep(&d, &d) == -1 && errno == EINTR)
			;
	}
	size_t len = sizeof(content) - 1;
	if ((size_t)off >= len)
		return 0;
	if (off + size > len)
		size = len - off;
	memcpy(buf, content + off, size);
	return size;
}

static const struct fuse_operations ops = {
	.init = hello_init,
	.getattr = hello_getattr,
	.readdir = hello_readdir,
	.open = hello_open,
	.read = hello_read,
};

int main(int argc, char *argv[]) {
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	if (fuse_opt_parse(&args, &opts, option_spec, NULL) == -1)
		return 1;
	int ret = fuse_main(args.argc, args.argv, &ops, NULL);
	fuse_opt_free_args(&args);
	return ret;
}
