console.error("boom", 42);
throw new Error("kaput");
