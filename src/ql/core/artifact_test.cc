#include "ql/core/artifact.h"

#include <gtest/gtest.h>

#include <map>

namespace ql {
namespace {

// A sink that keeps chunks by digest, as a store does (equal chunks once).
struct ChunkStore {
  std::map<std::string, std::string> chunks;
  int calls = 0;
  ChunkSink Sink() {
    return [this](const std::string& digest, std::string_view bytes) {
      ++calls;
      EXPECT_EQ(Sha256Hex(bytes), digest);
      chunks.emplace(digest, std::string(bytes));
      return Status::Ok();
    };
  }
};

TEST(BlobChunkerTest, CutsAStreamIntoChunksAndNamesTheWholeBlob) {
  const std::string bytes = "0123456789abcdefghij";  // 20 bytes, chunks of 8: 8 + 8 + 4
  ChunkStore store;
  BlobChunker chunker(/*max_bytes=*/100, /*chunk_bytes=*/8);
  // Fed in pieces that do not line up with the chunks.
  ASSERT_TRUE(chunker.Add(bytes.substr(0, 3), store.Sink()).ok());
  ASSERT_TRUE(chunker.Add(bytes.substr(3, 10), store.Sink()).ok());
  EXPECT_EQ(store.calls, 1) << "a chunk is passed on as soon as it is complete";
  ASSERT_TRUE(chunker.Add(bytes.substr(13), store.Sink()).ok());
  Result<BlobDescriptor> blob = chunker.Finish(store.Sink());
  ASSERT_TRUE(blob.ok()) << blob.status().ToString();
  EXPECT_EQ(blob->digest, Sha256Hex(bytes));
  EXPECT_EQ(blob->size, 20);
  ASSERT_EQ(blob->chunks.size(), 3u);
  EXPECT_EQ(blob->chunks[0], Sha256Hex("01234567"));
  EXPECT_EQ(blob->chunks[2], Sha256Hex("ghij"));
}

TEST(BlobChunkerTest, EqualChunksAreOneChunkAndAnEmptyBlobHasNone) {
  ChunkStore store;
  BlobChunker chunker(100, 4);
  ASSERT_TRUE(chunker.Add("abcdabcdabcd", store.Sink()).ok());
  Result<BlobDescriptor> blob = chunker.Finish(store.Sink());
  ASSERT_TRUE(blob.ok());
  EXPECT_EQ(blob->chunks.size(), 3u);
  EXPECT_EQ(store.chunks.size(), 1u) << "three equal chunks are stored once";
  BlobChunker empty(100, 4);
  Result<BlobDescriptor> nothing = empty.Finish(store.Sink());
  ASSERT_TRUE(nothing.ok());
  EXPECT_EQ(nothing->size, 0);
  EXPECT_TRUE(nothing->chunks.empty());
  EXPECT_EQ(nothing->digest, Sha256Hex(""));
}

TEST(BlobChunkerTest, ABlobOverTheLimitIsRefusedAndASinkErrorStopsIt) {
  ChunkStore store;
  BlobChunker chunker(10, 4);
  ASSERT_TRUE(chunker.Add("0123456789", store.Sink()).ok());
  Status over = chunker.Add("x", store.Sink());
  EXPECT_EQ(over.reason(), "artifact_too_large");
  EXPECT_NE(over.message().find("10 bytes"), std::string::npos) << over.message();

  BlobChunker failing(100, 4);
  Status st = failing.Add("0123456789", [](const std::string&, std::string_view) {
    return Unavailable("database_unavailable", "gone");
  });
  EXPECT_EQ(st.reason(), "database_unavailable");
}

TEST(BlobVerifierTest, AcceptsTheBlobAndRefusesEveryKindOfCorruption) {
  ChunkStore store;
  BlobChunker chunker(100, 4);
  ASSERT_TRUE(chunker.Add("abcdefghij", store.Sink()).ok());
  const BlobDescriptor blob = chunker.Finish(store.Sink()).value();
  auto read = [&](const std::vector<std::string>& chunks) {
    BlobVerifier verifier(blob);
    for (const std::string& chunk : chunks) {
      if (Status st = verifier.Next(chunk); !st.ok()) return st;
    }
    return verifier.Finish();
  };
  EXPECT_TRUE(read({"abcd", "efgh", "ij"}).ok());
  const Status flipped = read({"abcd", "efgH", "ij"});
  EXPECT_EQ(flipped.reason(), "artifact_corrupt");
  EXPECT_NE(flipped.message().find("chunk 1"), std::string::npos) << flipped.message();
  EXPECT_EQ(read({"abcd", "efgh"}).reason(), "artifact_corrupt") << "a chunk missing";
  EXPECT_EQ(read({"abcd", "efgh", "ij", "ij"}).reason(), "artifact_corrupt") << "one too many";
  // A descriptor that lies about the whole blob: each chunk is right, the blob is not.
  BlobDescriptor lying = blob;
  lying.digest = Sha256Hex("something else");
  BlobVerifier verifier(lying);
  for (const char* chunk : {"abcd", "efgh", "ij"}) ASSERT_TRUE(verifier.Next(chunk).ok());
  EXPECT_EQ(verifier.Finish().reason(), "artifact_corrupt");
}

TEST(ArtifactPathTest, RefusesEveryPathThatCouldLeaveTheTree) {
  for (const char* good : {"main.py", "lib/util.js", "a/b/c.sh", "名字.py", ".hidden", "a..b"}) {
    EXPECT_TRUE(ValidateArtifactPath(good).ok()) << good;
  }
  for (const char* bad :
       {"", "/etc/passwd", "../x", "a/../../x", "a/./b", "a//b", "a/", "a\\b", "a\nb", "..", "."}) {
    const Status st = ValidateArtifactPath(bad);
    EXPECT_EQ(st.reason(), "artifact_path_invalid") << bad;
  }
  EXPECT_EQ(ValidateArtifactPath(std::string(1025, 'a')).reason(), "artifact_path_invalid");
  EXPECT_EQ(ValidateArtifactPath(std::string("a\0b", 3)).reason(), "artifact_path_invalid");
  EXPECT_EQ(ValidateArtifactPath("\xff\xfe").reason(), "artifact_path_invalid");
}

TEST(TreeManifestTest, OneSpellingPerTreeThatReadsBack) {
  const std::string d1 = Sha256Hex("1"), d2 = Sha256Hex("2");
  Result<std::string> a =
      EncodeTreeManifest({{"lib/u.js", false, 1, d2}, {"main.js", true, 1, d1}});
  Result<std::string> b =
      EncodeTreeManifest({{"main.js", true, 1, d1}, {"lib/u.js", false, 1, d2}});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*a, *b) << "the order files are given in does not change the tree";
  EXPECT_EQ(*a, "{\"entries\":[{\"digest\":\"" + d2 +
                    "\",\"executable\":false,\"path\":\"lib/u.js\",\"size\":1},{\"digest\":\"" +
                    d1 +
                    "\",\"executable\":true,\"path\":\"main.js\",\"size\":1}],\"kind\":"
                    "\"qinglong/tree@v1\"}");
  Result<std::vector<TreeEntry>> back = DecodeTreeManifest(*a);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[1], (TreeEntry{"main.js", true, 1, d1}));
  // Another spelling of the same tree, or a traversal smuggled in, is refused on the way back.
  std::string spaced = *a;
  spaced.insert(1, " ");
  EXPECT_EQ(DecodeTreeManifest(spaced).status().reason(), "artifact_tree_invalid");
  std::string escaped = *a;
  escaped.replace(escaped.find("lib/u.js"), 8, "../u.js!");
  EXPECT_EQ(DecodeTreeManifest(escaped).status().reason(), "artifact_tree_invalid");
}

TEST(TreeManifestTest, RefusesDuplicatesConflictsAndBadEntries) {
  const std::string d = Sha256Hex("x");
  EXPECT_EQ(EncodeTreeManifest({{"a", false, 1, d}, {"a", true, 1, d}}).status().reason(),
            "artifact_path_duplicate");
  EXPECT_EQ(EncodeTreeManifest({{"a", false, 1, d}, {"a-b", false, 1, d}, {"a/b", false, 1, d}})
                .status()
                .reason(),
            "artifact_path_conflict");
  EXPECT_EQ(EncodeTreeManifest({}).status().reason(), "artifact_tree_invalid");
  EXPECT_EQ(EncodeTreeManifest({{"a", false, -1, d}}).status().reason(), "artifact_tree_invalid");
  EXPECT_EQ(EncodeTreeManifest({{"a", false, 1, "nope"}}).status().reason(),
            "artifact_tree_invalid");
  EXPECT_EQ(EncodeTreeManifest({{"../a", false, 1, d}}).status().reason(), "artifact_path_invalid");
}

TEST(ScriptRefTest, ParsesNamesAndPinnedVersions) {
  EXPECT_EQ(ParseScriptRef("backup.sh").value(), (ScriptRef{"backup.sh", std::nullopt}));
  EXPECT_EQ(ParseScriptRef("sync_2@12").value(), (ScriptRef{"sync_2", 12}));
  for (const char* bad : {"a@", "a@0", "a@01", "a@-1", "a@1x", "a@99999999999999999999", "a@1@2"}) {
    EXPECT_EQ(ParseScriptRef(bad).status().reason(), "script_ref_invalid") << bad;
  }
  for (const char* bad : {"", "@1", "-x", ".x", "a b", "a/b", "a;rm"}) {
    EXPECT_EQ(ParseScriptRef(bad).status().reason(), "script_name_invalid") << bad;
  }
  EXPECT_EQ(ParseScriptRef(std::string(129, 'a')).status().reason(), "script_name_invalid");
}

TEST(ScriptRefTest, PicksTheInterpreterByExtension) {
  EXPECT_EQ(InterpreterForPath("job.js"), "node");
  EXPECT_EQ(InterpreterForPath("dir/job.mjs"), "node");
  EXPECT_EQ(InterpreterForPath("job.py"), "python3");
  EXPECT_EQ(InterpreterForPath("job.sh"), "sh");
  EXPECT_EQ(InterpreterForPath("job.bash"), "bash");
  EXPECT_EQ(InterpreterForPath("job.ts"), std::nullopt);
  EXPECT_EQ(InterpreterForPath(".sh"), std::nullopt);
  EXPECT_EQ(InterpreterForPath("Makefile"), std::nullopt);
  EXPECT_EQ(InterpreterForPath("a.py/run"), std::nullopt);
}

}  // namespace
}  // namespace ql
